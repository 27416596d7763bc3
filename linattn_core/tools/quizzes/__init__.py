"""The exit tickets' questions: one JSON file per chapter, package data read by ``tools.course``.

Nothing here is code; the folder is a package so that it is found, listed and installed like every other.
"""
