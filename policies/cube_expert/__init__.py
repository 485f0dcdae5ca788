"""The scripted ALOHA transfer-cube expert: its end-effector plan (waypoints.py), the plan made
joint targets in gym-aloha's end-effector simulation (joint_table.py), and the policy serving
those targets (model.py, codec.py, checkpoint.py; family.py registers it). Imports nothing."""
