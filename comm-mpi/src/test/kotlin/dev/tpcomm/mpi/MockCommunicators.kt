package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.engine.NativeDispatcher

/**
 * An [MpiCommunicator] over a mocked [MpiBinding] (MPICH's ABI, `MPI_THREAD_MULTIPLE`, its own
 * thread), for engine tests that need no MPI library. By default without the consistency check
 * (a relaxed mock's all-reduce writes nothing, so the digests would not come back): the tests of
 * the check pass a config that turns it on.
 */
internal fun mockCommunicator(
    b: MpiBinding,
    config: CommConfig = CommConfig(worldSize = 2, rank = 0, checkConsistency = false),
    mpi: MpiConfig = MpiConfig(),
    cudaSupport: Int = -1,
): MpiCommunicator {
    val library = MpiLibrary("libmpich.so.12", 0L, "MPICH Version: 4.0.2", MpiImplementation.Mpich)
    val runtime = MpiRuntime(library, b, MpiThreadLevel.Multiple.value, false, cudaSupport)
    runtime.halt = {} // a mocked MPI_Abort returns: the test JVM must not end
    runtime.retain()
    return MpiCommunicator(runtime, b, 0x44000001L, 0x44000002L, config.rank, config.worldSize, config, mpi, NativeDispatcher("test-mpi"), true, "test")
}
