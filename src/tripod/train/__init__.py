"""Trainers: SFT on expert trajectories and the RL loop."""
