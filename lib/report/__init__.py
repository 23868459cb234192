"""Stage 06's plots and stage 11's browser report."""
