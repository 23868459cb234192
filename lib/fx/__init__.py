"""The PyTorch side (stage 09): FX characterization, fusion, concurrency and hardware mapping."""
