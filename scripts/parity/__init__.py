"""Numerical checks against a reference: LeRobot's ACT and pi0, the AOTInductor package,
RTC's exact path."""
