"""Typed records, configuration helpers, seeding and paths shared by every pillar."""
