"""Real-time chunking's boundary smoothness measured on small trained models (rtc_smoothness,
its models in smoothness_models)."""
