"""The model rules: torch_model (a model's source, weights and example inputs) and
model_weights (seeded initial weights)."""
