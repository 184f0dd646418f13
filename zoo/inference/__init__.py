"""Decoding from a trained model: sampling, greedy and beam search."""
