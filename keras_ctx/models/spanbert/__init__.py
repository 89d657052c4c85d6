"""The spanbert family: family.py (docs/design.md, "A new family")."""

