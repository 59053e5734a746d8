package dev.tpcomm.java

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.engine.CommunicatorCreation
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.DelicateCoroutinesApi
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.GlobalScope
import kotlinx.coroutines.async
import kotlinx.coroutines.future.asCompletableFuture
import kotlinx.coroutines.runBlocking
import java.util.concurrent.CompletableFuture

/**
 * Entry point of tpcomm for Java: creates [JavaCommunicator]s.
 *
 * ```java
 * List<JavaCommunicator> ranks = JavaComm.localWorld(4);            // in-process, for tests
 * JavaCommunicator comm = JavaComm.create("mpi", CommConfig.fromEnvironment());
 * ```
 */
public object JavaComm {
    /** A Java facade over [comm] (which stays owned by the facade's [JavaCommunicator.close]). */
    @JvmStatic
    public fun wrap(comm: Communicator): JavaCommunicator = JavaCommunicator(comm)

    /**
     * Every rank of a new in-process world of [worldSize] ranks ("local" backend), in rank order.
     * Drive each rank from its own thread (blocking methods) or issue futures for several ranks from
     * one thread. The timeout, flight-recorder size and options of [config] apply; its world size
     * and rank are ignored. Closing any rank closes that rank; close all of them when done.
     *
     * @throws IllegalArgumentException if [worldSize] < 1.
     */
    @JvmStatic
    @JvmOverloads
    public fun localWorld(worldSize: Int, config: CommConfig = CommConfig()): List<JavaCommunicator> {
        require(worldSize >= 1) { "JavaComm.localWorld: worldSize must be >= 1, got $worldSize" }
        val world = LocalWorld(worldSize, config)
        return world.communicators.map(::JavaCommunicator)
    }

    /**
     * Creates this process's communicator on [backend] (`"auto"`: the highest-priority available
     * one), waiting until every rank described by [config] has joined. See [Comm.create].
     *
     * @throws BackendUnavailableException if the backend is not on the classpath or cannot run here;
     * the message says what is missing.
     * @throws CommunicatorAbortedException if the thread is interrupted while waiting (flag set again).
     */
    @JvmStatic
    @JvmOverloads
    public fun create(backend: String = "auto", config: CommConfig = CommConfig.fromEnvironment()): JavaCommunicator =
        try {
            runBlocking { JavaCommunicator(Comm.create(backend, config)) }
        } catch (e: InterruptedException) {
            Thread.currentThread().interrupt()
            throw CommunicatorCreation(config.rank, backend, config.effectiveCreationTimeout).interrupted("interrupted while creating the communicator", e)
        }

    /**
     * [create] without blocking: the future resolves to the communicator once every rank has joined,
     * or completes exceptionally with the [BackendUnavailableException] or other failure itself. Never
     * throws at call time: a null [backend] or [config] completes the future with [IllegalArgumentException].
     */
    @JvmStatic
    @JvmOverloads
    @OptIn(DelicateCoroutinesApi::class)
    public fun createAsync(backend: String? = "auto", config: CommConfig? = CommConfig.fromEnvironment()): CompletableFuture<JavaCommunicator> =
        GlobalScope.async(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) {
            val name = required(backend, "JavaComm.createAsync", "backend", "a backend name (\"auto\", \"local\", \"mpi\", ...)")
            JavaCommunicator(Comm.create(name, required(config, "JavaComm.createAsync", "config", "a CommConfig (CommConfig.fromEnvironment())")))
        }.asCompletableFuture()
}
