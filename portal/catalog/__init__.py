"""Catalogue: GPU models and the fixed slices (products) sold on them."""
