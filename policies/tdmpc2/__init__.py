"""TD-MPC2 (Hansen, Su, Wang; ICLR 2024) served by Tempo: the world model (`model`), the MPPI
planner and fast mode as one module (`planner`), its config (`config`), the input codec
(`codec`); official checkpoints are imported by `policies.tdmpc2.official`, and the family's
parts (checkpoint format, import command, demo) are declared in `family`."""
