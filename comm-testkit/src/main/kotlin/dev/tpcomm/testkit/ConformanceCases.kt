package dev.tpcomm.testkit

/**
 * The conformance cases, written once and run by every kind of world: the in-process
 * [ConformanceSpec] runs each in a fresh world per world size, and [SpmdConformanceRunner] runs
 * them in order on one communicator of a multi-process (SPMD) world.
 *
 * [all] lists the [CaseKind.Collective] cases first (every collective on every dtype, op, dim and
 * root; random collectives; concurrent issue; object collectives; split and group; point-to-point;
 * refused bad arguments; monitored barriers), then the [CaseKind.Failure] cases (a rank that never calls; mismatched op,
 * dtype, shape, root and order; cancellation of an in-flight call; use after close; a monitored barrier
 * naming a rank that never calls), then the
 * [CaseKind.Soak].
 */
public object ConformanceCases {
    /** Every case, in the order runners run them. */
    public val all: List<ConformanceCase> by lazy {
        CollectiveCases.all + ReproducibleCases.all + MessageCases.all + MonitoredBarrierCases.collective + CompositeCases.collective + FailureCases.all + FailureSemanticsCases.all + MonitoredBarrierCases.failure + CompositeCases.failure + ConformanceCase("soak", CaseKind.Soak, 1) { comm, ctx -> ConformanceSoak.run(comm, ctx) }
    }

    /** The case named [name]. @throws NoSuchElementException when there is none. */
    public fun named(name: String): ConformanceCase =
        all.firstOrNull { it.name == name } ?: throw NoSuchElementException("no conformance case named '$name'; the cases are ${all.map { it.name }}")
}
