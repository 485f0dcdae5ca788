"""`FamilySection`, the base of every family's settings model (policies.registry.FamilySettings):
frozen, and an unknown field is refused, as every section of the daemon's config. Pydantic only:
the control process validates these sections and must never load torch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FamilySection(BaseModel):
    """A family's `policy.<section>:`: frozen, an unknown field refused (a typo never passes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
