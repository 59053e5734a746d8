package dev.tpcomm.testkit

/**
 * The suite against [ReferenceWorld], a deliberately simple backend: checks that every case can pass
 * (the suite asks nothing impossible). Smaller budgets than a real backend's run.
 */
class ReferenceConformanceSpec : ConformanceSpec(
    ReferenceWorld.launcher,
    ConformanceOptions(propertyIterations = 5, soakCollectives = 500, soakConcurrency = 16, worldSizes = listOf(1, 2, 5)).withSystemProperties(),
)
