"""Prices: Google's price catalog read per region, a dated cache of it, the shipped table
when neither can be had, and the one lookup every estimate prices through."""
