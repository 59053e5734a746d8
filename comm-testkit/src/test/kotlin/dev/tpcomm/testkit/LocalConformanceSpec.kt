package dev.tpcomm.testkit

/** The full conformance suite against the local backend (comm-coroutines). */
class LocalConformanceSpec : ConformanceSpec(LocalWorldLauncher)
