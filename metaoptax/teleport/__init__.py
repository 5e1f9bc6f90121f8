"""Symmetry teleportation: group actions and classic teleportation."""

from metaoptax.teleport import groups
from metaoptax.teleport.classic import TeleportState, teleport, with_teleportation
from metaoptax.teleport.on_the_fly import closed_form_group_gradient, teleport_on_the_fly

__all__ = ("groups", "TeleportState", "teleport", "with_teleportation",
           "closed_form_group_gradient", "teleport_on_the_fly")
