package mambago

// Version is the release of this module and of the Python package built from it.
const Version = "0.1.0"
