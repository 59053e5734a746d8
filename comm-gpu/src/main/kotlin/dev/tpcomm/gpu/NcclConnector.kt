package dev.tpcomm.gpu

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Device
import dev.tpcomm.engine.CommunicatorCreation
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.NativeRequest
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout

/**
 * Creates [NcclCommunicator]s on any [NcclApi] + [DeviceRuntime] pair: the `nccl` backend (JavaCPP),
 * the `rccl` backend (`java.lang.foreign`) and the simulated platform all come through here.
 * Thread-safe; every function is collective across the ranks of the [CommConfig].
 */
public object NcclConnector {
    /** Size of `ncclUniqueId` in bytes (`NCCL_UNIQUE_ID_BYTES`, NVIDIA/nccl and ROCm/rccl `src/nccl.h.in`). */
    public const val UNIQUE_ID_BYTES: Int = 128

    /**
     * Creates this rank's communicator: on [device]'s native thread (shared by every communicator of
     * the process on that device, created with the first), makes [device] current, creates a
     * stream, has rank 0 generate the unique id (`ncclGetUniqueId`), shares it through [bootstrap],
     * and initialises a non-blocking communicator with `ncclCommInitRankConfig`, polling
     * `ncclCommGetAsyncError` until every rank has joined or [CommConfig.timeout] passes (then
     * `ncclCommAbort` and [CommunicationTimeoutException]).
     *
     * @param onClose closed after the communicator (e.g. a bootstrap communicator it owns).
     * @throws IllegalArgumentException when [commConfig] asks for a blocking communicator (see
     * [NcclCommConfig.blocking]), or `NCCL_COMM_BLOCKING=1` is set in the environment the library reads
     * ([NcclApi.getEnv]), which would make it blocking anyway (NVIDIA/nccl `src/init.cc` `envConfigOverride`).
     * @throws BackendUnavailableException when the library is older than [NcclVersion.MINIMUM] (NCCL 2.18, ROCm 6.0's RCCL).
     * @throws NcclException when a library or runtime call fails.
     */
    public suspend fun connect(
        api: NcclApi,
        runtime: DeviceRuntime,
        device: Device,
        config: CommConfig,
        bootstrap: BootstrapChannel,
        backendName: String,
        commConfig: NcclCommConfig = NcclCommConfig(),
        onClose: AutoCloseable? = null,
    ): NcclCommunicator = connect(api, runtime, device, config, bootstrap, backendName, commConfig, onClose, DeviceThreads.PROCESS)

    /** [connect] with the registry of device threads to use ([DeviceThreads.PROCESS] for every real process). */
    internal suspend fun connect(
        api: NcclApi,
        runtime: DeviceRuntime,
        device: Device,
        config: CommConfig,
        bootstrap: BootstrapChannel,
        backendName: String,
        commConfig: NcclCommConfig,
        onClose: AutoCloseable?,
        threads: DeviceThreads,
    ): NcclCommunicator {
        require(!commConfig.blocking) {
            "NcclCommConfig(blocking = true) is not supported: a blocking ncclCommInitRankConfig or ncclCommSplit runs on the " +
                "calling thread until every rank has joined (NVIDIA/nccl src/group.cc ncclAsyncLaunch), so a rank that never arrives " +
                "could not be abandoned at the deadline (CommConfig.timeout); leave blocking = false (the default). " +
                "See docs/gpu.md, 'Blocking or non-blocking communicators'"
        }
        requireNonBlockingEnvironment(api)
        // The creation's deadline runs from here, the call; its failures are named by the core.
        val creation = CommunicatorCreation(config.rank, backendName, config.timeout)
        val index = deviceIndex(device)
        // One native thread per device in this process (docs/nccl-semantics.md N17): a second world on
        // the same device shares the first one's thread.
        val (thread, _) = threads.acquire(runtime, index, backendName)
        val dispatcher = thread.dispatcher
        var stream = 0L
        try {
            val version = dispatcher.execute {
                check(runtime.setDevice(index), "setDevice($index)", runtime, creation)
                val v = IntArray(1)
                checkNccl(api.getVersion(v), "ncclGetVersion", api, creation)
                NcclVersion.requireSupported(api.libraryName, v[0], backendName)
                val s = LongArray(1)
                check(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags", runtime, creation)
                stream = s[0]
                v[0]
            }
            val ownId = if (config.rank == 0) {
                dispatcher.execute {
                    val id = ByteArray(UNIQUE_ID_BYTES)
                    checkNccl(api.getUniqueId(id), "ncclGetUniqueId", api, creation)
                    id
                }
            } else {
                null
            }
            val id = if (config.worldSize == 1) ownId!! else bootstrap.shareUniqueId(config.rank, ownId)
            require(id.size == UNIQUE_ID_BYTES) { "the bootstrap returned ${id.size} bytes; an ncclUniqueId has $UNIQUE_ID_BYTES" }
            val comm = initRank(api, dispatcher, config, id, commConfig, creation)
            return NcclCommunicator(
                api, runtime, thread, comm, stream, config.rank, config.worldSize, device, backendName,
                config, version, commConfig, onClose,
            )
        } catch (t: Throwable) {
            if (stream != 0L && !dispatcher.isClosed) runCatching { dispatcher.execute { thread.retireStream(stream) } }
            thread.release(config.timeout.inWholeNanoseconds)
            throw t
        }
    }

    /**
     * NCCL reads `NCCL_COMM_BLOCKING` and lets 0 or 1 override every communicator's `blocking` field,
     * at init and at split (NVIDIA/nccl `src/init.cc`, `envConfigOverride`, called by
     * `parseCommConfig` and `copyCommConfig`; docs/nccl-semantics.md N6): with 1 the engine's
     * non-blocking communicators would silently become blocking, and a rank that never arrives would
     * hold the native thread past every deadline. Refused before anything is created.
     */
    internal fun requireNonBlockingEnvironment(api: NcclApi) {
        val value = api.getEnv("NCCL_COMM_BLOCKING")?.trim()
        require(value != "1") {
            "NCCL_COMM_BLOCKING=1 is set in this process's environment: ${api.libraryName} would then make every communicator " +
                "blocking (NVIDIA/nccl src/init.cc envConfigOverride), and a rank that never arrives could not be abandoned at the " +
                "deadline (CommConfig.timeout). Unset NCCL_COMM_BLOCKING (or set it to 0) for tpcomm's GPU backends; " +
                "see docs/gpu.md, 'Blocking or non-blocking communicators'"
        }
    }

    /**
     * `ncclCommInitRankConfig`, then polls `ncclCommGetAsyncError` from the native thread's progress
     * loop (other communicators of the device keep issuing meanwhile) until every rank joined, or
     * the [creation]'s deadline passed: then `ncclCommAbort` and [CommunicationTimeoutException].
     */
    private suspend fun initRank(api: NcclApi, dispatcher: NativeDispatcher, config: CommConfig, id: ByteArray, commConfig: NcclCommConfig, creation: CommunicatorCreation): Long {
        // The ncclComm_t* cell outlives the call: NCCL 2.14-2.17's init job reads and writes it after the
        // call returned. It is freed once the communicator is ready, and left allocated (8 bytes) when
        // init fails or times out, since the job may still write it.
        val cell = Arena.ofShared()
        val out = cell.allocate(ValueLayout.JAVA_LONG)
        out.set(ValueLayout.JAVA_LONG, 0, 0L)
        val (code, comm) = dispatcher.execute {
            val c = api.commInitRankConfig(out, config.worldSize, id, config.rank, commConfig)
            c to out.get(ValueLayout.JAVA_LONG, 0)
        }
        if (code != NcclResult.IN_PROGRESS) {
            if (code != NcclResult.SUCCESS) {
                if (comm != 0L) dispatcher.execute { api.commAbort(comm) }
                checkNccl(code, "ncclCommInitRankConfig", api, creation)
            }
            cell.close()
            return comm
        }
        val status = IntArray(1)
        dispatcher.await(NativeRequest {
            val state = api.asyncState(comm, status)
            when {
                state == NcclResult.SUCCESS -> true
                state != NcclResult.IN_PROGRESS -> {
                    api.commAbort(comm)
                    checkNccl(state, "ncclCommInitRankConfig", api, creation)
                    true
                }
                creation.deadlinePassed() -> {
                    api.commAbort(comm)
                    throw creation.timedOut(
                        "ncclCommInitRankConfig: not every one of the ${config.worldSize} ranks joined within ${config.timeout}; " +
                            "check that all ranks started, use the same rendezvous, and can reach each other (NCCL_SOCKET_IFNAME)",
                    )
                }
                else -> false
            }
        })
        cell.close()
        return comm
    }

    private fun checkNccl(code: Int, call: String, api: NcclApi, creation: CommunicatorCreation) {
        if (code == NcclResult.SUCCESS) return
        val text = runCatching { api.getErrorString(code) }.getOrNull()
        throw creation.nativeFailure("$call failed: ${NcclResult.name(code)} ($code)" + (text?.let { ": $it" } ?: "") + ". ${NcclResult.hint(code)}.", code)
    }

    private fun check(code: Int, call: String, runtime: DeviceRuntime, creation: CommunicatorCreation) {
        if (code == DeviceRuntime.SUCCESS) return
        val text = runCatching { runtime.getErrorString(code) }.getOrNull()
        throw creation.nativeFailure("${runtime.platformName} $call failed with error $code" + (text?.let { ": $it" } ?: ""), code, isRuntimeError = true)
    }

}
