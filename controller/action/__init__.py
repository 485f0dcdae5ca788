"""From chunks to one action per tick, per robot: ensembler -> teleop mix -> guard chain.

`ActionPipeline` holds the three for one robot; the loop and the profiling tools both use it.
"""
