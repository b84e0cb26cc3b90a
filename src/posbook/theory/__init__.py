"""Constructions and proofs: exact weights that make a mechanism do what a theorem says, checked in torch and sympy."""
