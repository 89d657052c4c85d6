"""The mbert family: family.py (docs/design.md, "A new family")."""

