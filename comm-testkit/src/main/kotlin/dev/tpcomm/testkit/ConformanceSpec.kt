package dev.tpcomm.testkit

import io.kotest.core.spec.style.FunSpec

/**
 * The conformance suite as a Kotest spec, for backends whose ranks can live in one JVM. A backend
 * runs it with one line in its tests:
 *
 * ```
 * class LocalConformanceSpec : ConformanceSpec(LocalWorldLauncher)
 * ```
 *
 * It registers:
 * - every [ConformanceCases] case (but the soak) for each of [ConformanceOptions.effectiveWorldSizes],
 *   each in a fresh world (failure cases with `timeout = failureTimeout`); cases that do not apply
 *   are registered disabled, so reports show them skipped;
 * - Kotest property tests with a random world size (1 to [ConformanceOptions.maxWorldSize]), dtype,
 *   op, shape, dim and root for every collective, and for split/group and object collectives;
 * - failure modes only an in-process world can show (an exception thrown by one rank's code);
 * - the soak ([ConformanceOptions.soakCollectives] collectives, [ConformanceOptions.soakConcurrency]
 *   in flight per rank, [ConformanceOptions.soakWorldSize] ranks).
 *
 * Every test runs under a timeout, so a hang fails the test instead of hanging the JVM. Budgets
 * come from [options]; the default reads `-Dtpcomm.testkit.*` overrides ([ConformanceOptions.withSystemProperties]).
 */
public abstract class ConformanceSpec(
    launcher: WorldLauncher,
    options: ConformanceOptions = ConformanceOptions().withSystemProperties(),
) : FunSpec({ ConformanceSuite(launcher, options).register(this) })
