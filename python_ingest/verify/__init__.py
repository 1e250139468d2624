"""`sluice verify`: prove a lake table equals its source table without copying either side."""
