"""Synthetic data made with the LLM layer: in-knowledge queries."""
