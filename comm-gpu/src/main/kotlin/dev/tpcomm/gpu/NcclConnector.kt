package dev.tpcomm.gpu

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Device
import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.CommunicatorCreation
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred

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
     * and initialises a non-blocking communicator with `ncclCommInitRankConfig` on a thread of its
     * own (so that NCCL 2.18-2.26's and RCCL's thread-local group job never meets another call, and
     * no open group of the device's thread holds it: docs/nccl-semantics.md N10a, N3), polling
     * `ncclCommGetAsyncError` until every rank has joined or [CommConfig.effectiveCreationTimeout]
     * passes, counted from this call (then `ncclCommAbort` and [CommunicationTimeoutException]).
     *
     * @param onClose closed after the communicator (e.g. a bootstrap communicator it owns).
     * @throws IllegalArgumentException when [commConfig] asks for a blocking communicator (see
     * [NcclCommConfig.blocking]), or `NCCL_COMM_BLOCKING` is 1 as the library reads it (the environment,
     * [NcclApi.getEnv], or NCCL's configuration files; `01` and `0x1` are 1 too), which would make it
     * blocking anyway (NVIDIA/nccl `src/init.cc` `envConfigOverride`, `src/misc/param.cc`).
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
                "could not be abandoned at the deadline (CommConfig.creationTimeout); leave blocking = false (the default). " +
                "See docs/gpu.md, 'Blocking or non-blocking communicators'"
        }
        requireNonBlockingEnvironment(api)
        // The creation's deadline runs from here, the call; its failures are named by the core.
        val creation = CommunicatorCreation(config.rank, backendName, config.effectiveCreationTimeout)
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
            val comm = initRank(api, runtime, index, config, id, commConfig, creation, backendName)
            return NcclCommunicator(
                api, runtime, thread, comm, stream, config.rank, config.worldSize, device, backendName,
                config, version, commConfig, onClose,
                // The world: every rank of it has the same unique id, no other world has it.
                worldKey = "id:" + id.joinToString("") { "%02x".format(it) },
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
     * hold the native thread past every deadline. Refused before anything is created, read as NCCL
     * reads it (issue 35, finding 6; [NcclEnvRead]): `strtoll(.., 0)`, so `01`, `0x1` and ` 1` are 1
     * too, and from the configuration files NCCL applies at its first init when the environment
     * does not set it (`NCCL_CONF_FILE` or `$HOME/.nccl.conf`, then `/etc/nccl.conf`).
     */
    internal fun requireNonBlockingEnvironment(api: NcclApi, readFile: (String) -> String? = NcclEnvRead::readIfPresent) {
        val inEnvironment = api.getEnv("NCCL_COMM_BLOCKING")
        val rccl = api.libraryName.contains("RCCL", ignoreCase = true)
        val value = NcclEnvRead.value("NCCL_COMM_BLOCKING", api::getEnv, readFile, rccl)
        require(NcclEnvRead.integer(value) != 1L) {
            val where = if (inEnvironment != null) {
                "in this process's environment"
            } else {
                "in ${NcclEnvRead.sourceFile("NCCL_COMM_BLOCKING", api::getEnv, readFile, rccl)}, a configuration file ${api.libraryName} reads at its first init"
            }
            "NCCL_COMM_BLOCKING=$value is set $where: ${api.libraryName} would then make every communicator " +
                "blocking (NVIDIA/nccl src/init.cc envConfigOverride), and a rank that never arrives could not be abandoned at the " +
                "deadline (CommConfig.creationTimeout). Unset NCCL_COMM_BLOCKING (or set it to 0) for tpcomm's GPU backends; " +
                "see docs/gpu.md, 'Blocking or non-blocking communicators'"
        }
    }

    /**
     * `ncclCommInitRankConfig` on a thread of its own (issue 35, findings 1 and 2), which polls
     * `ncclCommGetAsyncError` until every rank joined, or the [creation]'s deadline passed (then
     * `ncclCommAbort` and [CommunicationTimeoutException]); the device's thread keeps issuing for
     * the other communicators of the device meanwhile.
     *
     * Why not on the device's thread:
     * - **Finding 1.** NCCL 2.18 to 2.26 and RCCL keep a non-blocking group job in the issuing
     *   thread's thread-local storage until `ncclCommGetAsyncError` joins it (NVIDIA/nccl v2.26.6-1
     *   `src/group.cc`: `__thread struct ncclGroupJob ncclGroupJobMain`; `ncclGroupEndInternal`
     *   returns `ncclInProgress` without resetting `ncclAsyncJobs`/`ncclGroupCommHead`;
     *   `groupResetJobState` only from `ncclGroupJobComplete`). Any other call of that thread that
     *   ends a group (every enqueue, init, split, finalize, abort) would launch the in-flight init
     *   job a second time over the same lists. v2.27.3-1 moved the job to the heap
     *   (`groupLocalResetJobState`). Here the only thread whose state holds the job is this one,
     *   and it calls nothing else until it joined the job (or aborted it: `ncclCommAbort` joins it
     *   through `ncclCommEnsureReady` → `ncclGroupJobAbort`). One rule for every version: no floor raised.
     * - **Finding 2.** The group depth is per thread (`__thread int ncclGroupDepth`): on the device's
     *   thread an open point-to-point window of another communicator would make the init only queue
     *   its job and return `ncclSuccess` with nothing built (N3); this thread has no open group.
     *
     * The init has no kernel launch, so the device's one launch order (N17) is untouched. A caller
     * that is cancelled meanwhile leaves the thread to finish: it aborts what it built.
     */
    private suspend fun initRank(api: NcclApi, runtime: DeviceRuntime, device: Int, config: CommConfig, id: ByteArray, commConfig: NcclCommConfig, creation: CommunicatorCreation, backendName: String): Long {
        val done = CompletableDeferred<Long>()
        Thread.ofPlatform().daemon(true).name("tpcomm-$backendName-init-device$device").start {
            try {
                val comm = initOnThisThread(api, runtime, device, config, id, commConfig, creation)
                if (!done.complete(comm)) api.commAbort(comm) // the caller gave up first: nobody else will
            } catch (t: Throwable) {
                done.completeExceptionally(t)
            }
        }
        try {
            return done.await()
        } catch (e: CancellationException) {
            // Whoever comes second aborts: the thread when the cancel came first, here when the communicator did.
            if (!done.completeExceptionally(e)) abortCompleted(done, api)
            throw e
        }
    }

    /** Aborts the communicator [done] completed with (nothing when it failed). */
    @OptIn(kotlinx.coroutines.ExperimentalCoroutinesApi::class)
    private fun abortCompleted(done: CompletableDeferred<Long>, api: NcclApi) {
        runCatching { done.getCompleted() }.getOrNull()?.let { api.commAbort(it) }
    }

    /** [initRank]'s body, on its own thread: init, then poll until ready, failed or past the deadline. */
    private fun initOnThisThread(api: NcclApi, runtime: DeviceRuntime, device: Int, config: CommConfig, id: ByteArray, commConfig: NcclCommConfig, creation: CommunicatorCreation): Long {
        check(runtime.setDevice(device), "setDevice($device)", runtime, creation) // ncclCommInitRankDev takes the calling thread's device
        // The ncclComm_t* cell outlives the call: NCCL 2.14-2.17's init job reads and writes it after the
        // call returned. It is freed once the communicator is ready, and left allocated (8 bytes) when
        // init fails or times out, since the job may still write it.
        val cell = Arena.ofShared()
        val out = cell.allocate(ValueLayout.JAVA_LONG)
        out.set(ValueLayout.JAVA_LONG, 0, 0L)
        val code = api.commInitRankConfig(out, config.worldSize, id, config.rank, commConfig)
        val comm = out.get(ValueLayout.JAVA_LONG, 0)
        if (code != NcclResult.IN_PROGRESS && code != NcclResult.SUCCESS) {
            if (comm != 0L) api.commAbort(comm)
            checkNccl(code, "ncclCommInitRankConfig", api, creation)
        }
        // Whatever it returned, wait until the communicator left ncclInProgress: that read also joins the
        // group job (src/init.cc ncclCommGetAsyncError → ncclGroupJobComplete).
        val status = IntArray(1)
        val backoff = Backoff.forLibraryThread()
        while (true) {
            val state = api.asyncState(comm, status)
            when {
                state == NcclResult.SUCCESS -> break
                state != NcclResult.IN_PROGRESS -> {
                    api.commAbort(comm)
                    checkNccl(state, "ncclCommInitRankConfig", api, creation)
                }
                creation.deadlinePassed() -> {
                    api.commAbort(comm)
                    throw creation.timedOut(
                        "ncclCommInitRankConfig: not every one of the ${config.worldSize} ranks joined within ${creation.timeout} (CommConfig.creationTimeout); " +
                            "check that all ranks started, use the same rendezvous, and can reach each other (NCCL_SOCKET_IFNAME)",
                    )
                }
            }
            backoff.idle()
        }
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
