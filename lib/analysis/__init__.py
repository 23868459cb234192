"""What stages 03-05 compute from the costs and the profile: roofline, critical path, energy."""
