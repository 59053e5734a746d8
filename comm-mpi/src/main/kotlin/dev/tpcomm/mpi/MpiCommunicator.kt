package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.FrontHandle
import kotlinx.coroutines.CoroutineDispatcher

/**
 * A [Communicator] over an MPI communicator (a duplicate of `MPI_COMM_WORLD`, or one made by
 * [split]/[group] with `MPI_Comm_split`), created by [MpiBackendFactory].
 *
 * **Threading.** Every MPI call of this communicator runs on one [NativeDispatcher] thread
 * ([nativeDispatcher]), in call order, so every rank issues its collectives in program order.
 * With `MPI_THREAD_MULTIPLE` ([MpiThreadLevel.Multiple], the default) each communicator, split
 * ones included, has its own thread, so collectives on different communicators never wait for one
 * another. With [MpiThreadLevel.Single] or [MpiThreadLevel.Serialized] all communicators of the
 * process share one MPI thread (MPI is cheaper per call without thread support, see
 * [MpiThreadLevel.Single]): blocking collectives on different
 * communicators then run one after the other, so every rank must issue them in the same order
 * (as in PyTorch's MPI process group), or use [MpiProgress.NonBlocking], whose operations progress
 * together. Callers already on [nativeDispatcher] (`withContext(comm.nativeDispatcher) { ... }`)
 * skip the thread hop: the small-message fast path.
 *
 * **Progress.** With [MpiProgress.Blocking] (the default while [MpiConfig.abortOnTimeout] is on)
 * collectives are blocking MPI calls on that thread, as fast as C; the caller's coroutine is
 * suspended meanwhile and compute elsewhere overlaps. With [MpiProgress.NonBlocking] they are
 * `MPI_I*` calls polled with `MPI_Test` by the dispatcher's progress loop, several in flight at
 * once. Point-to-point calls are always non-blocking, so concurrent sends and receives never
 * deadlock.
 *
 * **Failure.** Arguments are checked first, on every path, device tensors included (the core's
 * validator: the same [IllegalArgumentException] as on every backend, for heap, read-only, closed
 * or aliased tensors, sizes past MPI's int count, tags past [tagUpperBound]), before a device
 * tensor is staged or any MPI call is made. MPI errors (the communicator uses
 * `MPI_ERRORS_RETURN`) become [CommunicationException]s carrying MPI's error string. A call past
 * [CommConfig.timeout] raises [CommunicationTimeoutException] with the flight recorder's dump (also
 * printed to stderr), aborts the communicator ([isAborted]), and with [MpiConfig.abortOnTimeout]
 * calls `MPI_Abort` so that every rank of the job ends (the process ends itself if MPI does not).
 * A caller's own deadline (`withTimeout`, `awaitAll(timeout)`) raises
 * [CommunicationTimeoutException] at that deadline in every progress mode and aborts the
 * communicator. A mismatched collective (ranks calling different operations, dtypes, shapes, ops,
 * roots or dims) raises [CollectiveMismatchException] on every rank before any data moves: the
 * check is on unless [CommConfig.checkConsistency] is false; a peer's abort makes later calls throw
 * [CommunicatorAbortedException]. Tensors are retained while MPI may touch them (a `close()`
 * meanwhile is deferred); buffers of operations that failed while MPI may still touch them are
 * kept for the life of the process.
 *
 * **Device tensors.** CUDA tensors go to MPI as device pointers when the library is CUDA-aware
 * ([passesDevicePointers]). Other device tensors (MPI not CUDA-aware, [CudaAwareMode.Disabled], or
 * ROCm) are staged through host memory with the [dev.tpcomm.spi.DeviceStaging] that
 * [dev.tpcomm.spi.DeviceStagingRegistry] finds for their device (comm-nccl and comm-rccl offer one
 * when their GPU runtime is available): inputs are copied to host temporaries, the operation runs on
 * the host, outputs are copied back, and the temporaries are freed. [gather] and [allToAll] then
 * return host tensors. A failed copy to the host raises [CommunicationException] and aborts the
 * communicator; a failed copy back raises it and leaves the communicator usable. With no staging
 * for the device, such tensors are refused with [IllegalArgumentException] saying how to register
 * one. The caller must have waited for the device work that writes a tensor before passing it.
 *
 * **Shape.** This class is a handle: every [Communicator] operation goes through the library's one
 * front (validation, call order, records, deadlines, failure, close), into which the MPI backend
 * is composed; the members declared here are the MPI extras. They are reachable on any
 * [Communicator] too ([dev.tpcomm.mpi.duplicate]).
 *
 * Thread-safe. [close] is idempotent; the last MPI communicator to close calls `MPI_Finalize`.
 */
public class MpiCommunicator private constructor(
    /** The front every operation goes through; the MPI backend is composed into it. */
    @property:InternalTpcommApi override val front: CommunicatorFront,
    internal val backend: MpiBackend,
) : Communicator by front, FlightRecorded, FrontHandle {
    internal constructor(backend: MpiBackend) : this(backend.front, backend)

    internal constructor(
        runtime: MpiRuntime, binding: MpiBinding, handle: Long, controlHandle: Long, rank: Int, worldSize: Int, config: CommConfig,
        mpiConfig: MpiConfig, dispatcher: dev.tpcomm.engine.NativeDispatcher, ownsDispatcher: Boolean, name: String, tagUpperBound: Int = 32767,
    ) : this(MpiBackend(runtime, binding, handle, controlHandle, rank, worldSize, config, mpiConfig, dispatcher, ownsDispatcher, name, tagUpperBound))

    override val flightRecorder: FlightRecorder get() = front.flightRecorder

    /** The configuration this communicator was created with. */
    public val config: CommConfig get() = backend.config

    /** The MPI settings in effect. */
    public val mpiConfig: MpiConfig get() = backend.mpiConfig

    /**
     * The largest tag [send], [recv] and [probe] accept: the communicator's `MPI_TAG_UB` attribute
     * (MPICH 4.0 with ch4:ucx: 2^28 - 1; Open MPI 4.1: 2^31 - 1; at least 32767 by the standard).
     */
    public val tagUpperBound: Int get() = backend.tagUpperBound

    /** The MPI implementation this process loaded. */
    public val implementation: MpiImplementation get() = backend.runtime.implementation

    /** `MPI_Get_library_version`'s text. */
    public val libraryVersion: String get() = backend.runtime.library.version

    /** Whether device (CUDA) tensors are handed to MPI directly (CUDA-aware MPI); when false they are staged through host memory. */
    public val passesDevicePointers: Boolean get() = backend.passesDevicePointers

    /**
     * The communicator's thread as a coroutine dispatcher: code run in
     * `withContext(comm.nativeDispatcher)` calls MPI without a thread hop (hot loops of small messages).
     */
    public val nativeDispatcher: CoroutineDispatcher get() = backend.nativeDispatcher

    /** True once [close] ran on this rank. Thread-safe. */
    public val isClosed: Boolean get() = front.isClosed

    /** The flight recorder's JSON dump of recent operations. */
    public fun flightRecorderDump(): String = front.flightRecorder.dumpJson()

    /**
     * Per-operation timing of the MPI calls (count, total and maximum), by operation name; empty
     * unless [MpiConfig.profiling] is on. The consistency check's exchange is `"<operation>(signature)"`;
     * a small all-reduce, broadcast or barrier finished from that exchange ([MpiSlotPayload]) makes
     * no other MPI call, so it appears under that name only. A snapshot; thread-safe.
     */
    public fun profile(): Map<String, MpiOpProfile> = backend.profile()

    /**
     * Collective: a new communicator over the same ranks (`MPI_Comm_dup`) with its own thread and
     * the given settings (e.g. a shorter timeout, or `abortOnTimeout = false` for a communicator
     * that may fail without ending the job), issued through the front as a collective of its own
     * (numbered, recorded, signed, timed against the creation deadline). Breaking it leaves this
     * one usable. Every rank must call.
     *
     * @throws IllegalArgumentException when [commConfig]'s worldSize/rank differ from this communicator's.
     */
    public suspend fun duplicate(commConfig: CommConfig = config, mpi: MpiConfig = mpiConfig): MpiCommunicator {
        require(commConfig.worldSize == worldSize && commConfig.rank == rank) {
            "duplicate: the configuration says rank ${commConfig.rank} of ${commConfig.worldSize}, this communicator is rank $rank of $worldSize"
        }
        return front.duplicateCollective(MpiGroups.Duplication(commConfig, mpi)) as MpiCommunicator
    }

    override fun toString(): String = "MpiCommunicator(${backend.name}, rank $rank of $worldSize, ${backend.runtime.implementation})"
}
