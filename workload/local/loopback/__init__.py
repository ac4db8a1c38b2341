"""Loopback HTTP servers in front of an emulator: a proxy whose behaviour comes from a plug-in, and
the XML multipart upload the GCS emulator lacks (Google's connector writes through it)."""
