"""Caching profiles (contract section 4a): per model, the provider's cache lifetime
and minimum prompt, and the prices of uncached, cached and written input tokens.
From the models file (`CACHEWATCH_MODELS_FILE`), else the built-in figures per
provider, with prices from the price source. docs/providers.md lists every
built-in figure with its source and date."""

from service.profiles.models_file import ModelsFileError
from service.profiles.profile import Profile
from service.profiles.resolve import ANNOTATED_COLUMNS, Profiles, load_profiles, profiles_for

__all__ = [
    "ANNOTATED_COLUMNS",
    "ModelsFileError",
    "Profile",
    "Profiles",
    "load_profiles",
    "profiles_for",
]
