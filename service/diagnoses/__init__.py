"""The providers' own diagnoses of single misses, beside cachewatch's.

Anthropic's cache diagnostics and OpenAI's prompt cache diagnostics compare a
request's structure with an earlier request's and name the first part that
differs (docs/providers.md). They see no expiry, routing or eviction; cachewatch
sees those, and locates a change of the prompt's start to a segment from its own
blocks. Per diagnosed request `verdicts` says what cachewatch found, `reasons`
which findings agree with which provider reason, and `agreement` sums both into
the table and the evidence lines a regression and a finding show.
"""
