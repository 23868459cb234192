"""Two-device splits: the boundary sweep and ranking, export and validation of the parts, runners, diagrams, Hailo."""
