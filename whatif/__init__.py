"""What-if from history: a recorded period re-simulated under another policy (docs/whatif.md)."""
