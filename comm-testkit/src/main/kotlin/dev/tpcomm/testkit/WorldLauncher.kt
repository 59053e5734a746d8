package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator

/**
 * Starts an in-process world: [worldSize] ranks in this JVM, each running [run]'s block with its
 * own [Communicator], and returns the blocks' results in rank order.
 *
 * The conformance suite ([ConformanceSpec]) drives a backend only through this interface, so any
 * backend whose ranks can live in one JVM (the local backend, a simulated GPU platform) runs the
 * whole suite by providing one launcher. Implementations must start every rank concurrently (a
 * collective needs all of them), pass [CommConfig] with `worldSize` set to the backend, close or
 * release the world when every block has ended, and propagate a block's exception after the other
 * ranks have ended (as `runLocalWorld` does). The suite wraps every call in a timeout, so a hang in
 * the backend fails the test instead of hanging the JVM — provided the launcher's waiting is
 * cancellable.
 *
 * Not a `fun interface`: its single function is generic.
 */
public interface WorldLauncher {
    /** Runs [block] on every rank of a new world of [worldSize] ranks created with [config]; results in rank order. */
    public suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R>
}
