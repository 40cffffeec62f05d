"""The findings' thresholds (contract section 5b): the settings' (their defaults
are there, once), as the pure functions take them."""

from __future__ import annotations

from dataclasses import dataclass

from service.settings import Settings


@dataclass(frozen=True)
class Thresholds:
    min_share: float
    volatile_share: float
    volatile_min_requests: int
    drift_hours: float
    drift_variant_share: float
    drift_max_variants: int
    drift_token_tolerance: float
    rewrite_share: float
    ceiling_target: float

    @classmethod
    def of(cls, settings: Settings) -> Thresholds:
        return cls(
            min_share=settings.finding_min_share,
            volatile_share=settings.finding_volatile_share,
            volatile_min_requests=settings.finding_volatile_min_requests,
            drift_hours=settings.finding_drift_hours,
            drift_variant_share=settings.finding_drift_variant_share,
            drift_max_variants=settings.finding_drift_max_variants,
            drift_token_tolerance=settings.finding_drift_token_tolerance,
            rewrite_share=settings.finding_rewrite_share,
            ceiling_target=settings.finding_ceiling_target,
        )
