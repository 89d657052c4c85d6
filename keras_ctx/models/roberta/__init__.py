"""The roberta family: family.py, convert.py (docs/design.md, "A new family")."""

