"""The training-dynamics study: LiSA-PVT-T against PVT-T and FLatten-PVT-T trained from scratch
(``tools/training_dynamics.py``): draws.py (its datasets), study.py (runs and rows), document.py
(docs/training_dynamics.md)."""
