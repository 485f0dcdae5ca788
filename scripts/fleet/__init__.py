"""Many robots against one daemon (bench_fleet): the robots (fleet_robots), the daemon and its
policies (fleet_serving) and the modes measured (fleet_modes)."""
