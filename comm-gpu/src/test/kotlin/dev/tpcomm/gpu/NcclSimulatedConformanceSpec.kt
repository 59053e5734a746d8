package dev.tpcomm.gpu

import dev.tpcomm.testkit.ConformanceSpec

private val launcher = SimulatedWorldLauncher()

/** The comm-testkit conformance suite against the NCCL engine on the simulated platform (no GPU involved). */
class NcclSimulatedConformanceSpec : ConformanceSpec(launcher, launcher.options())
