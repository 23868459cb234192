"""Shared logic of the analysis pipeline: every computation lives here, stage scripts only wire it."""
