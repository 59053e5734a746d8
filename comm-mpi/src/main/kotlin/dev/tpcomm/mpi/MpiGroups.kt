package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.OperationCall

/**
 * The collectives of one MPI communicator that make communicators: `split` and `group`
 * (`MPI_Comm_split`) and `duplicate` (`MPI_Comm_dup`), each with the private duplicate that carries
 * the new communicator's abort notices ([MpiAbortNotices]), made on the communicator's thread
 * under the call's deadline; the new communicator is wrapped by [MpiBackendFactory.wrap].
 */
internal class MpiGroups(
    private val threading: MpiThreading,
    private val runtime: MpiRuntime,
    private val binding: MpiBinding,
    private val handle: Long,
    private val config: CommConfig,
    private val mpiConfig: MpiConfig,
    /** The communicator's name: the new ones are named after it. */
    private val commName: String,
) {
    private val abi: MpiAbi = binding.abi
    private val check: MpiConsistencyCheck = threading.check
    private val calls: MpiNativeCalls = check.calls
    private val failures: MpiFailures = threading.failures

    /** `MPI_Comm_split` of [call] (a split, or a group: then [color] and [key] come from the ranks). */
    suspend fun runSplit(call: OperationCall, color: Int?, key: Int): Communicator? {
        val made = make(call) { out -> binding.commSplit(handle, color ?: abi.undefined, key, out) }
        if (made[0] == abi.commNull) return null
        return MpiBackendFactory.wrap(
            runtime, binding, made[0], config, mpiConfig, "${commName}.split${call.entry.collectiveSequence}-color$color", existingControl = made[1],
        )
    }

    /**
     * Makes a communicator by [native] (`MPI_Comm_split` or `MPI_Comm_dup` of this one, writing the
     * new handle at its argument) for [call], on the communicator's thread under the call's deadline,
     * after the signature exchange; returns the new handle and its abort-notice duplicate ([controlOf];
     * none for `MPI_COMM_NULL`). A caller whose withTimeout expires is told at its deadline
     * ([MpiThreading.inFlight]) while the thread finishes the collective.
     */
    private suspend fun make(call: OperationCall, native: (out: Long) -> Int): LongArray {
        val name = call.name
        val entry = call.entry
        val sig = check.sig(call)
        val handOff = threading.handOver(call)
        return threading.inFlight(entry) {
            threading.onThread(handOff) {
                try {
                    failures.ensureUsable(name, entry)
                    if (sig != null) check.exchangeBlocking(sig, name, entry)
                    val out = calls.scratchAddress + MpiNativeCalls.OFF_HANDLE
                    calls.runBlockingCall(name, entry, null) { native(out) }
                    val made = abi.readHandle(calls.scratch, MpiNativeCalls.OFF_HANDLE)
                    if (made == abi.commNull) longArrayOf(made, 0L) else longArrayOf(made, controlOf(made, name, entry))
                } finally {
                    handOff.mpiDone()
                }
            }
        }
    }

    /**
     * The abort-notice duplicate of a communicator [made] by [operation], made here on this
     * communicator's thread under its deadline (`MPI_Comm_dup` is collective over [made]): a rank
     * whose caller gave up (withTimeout) still finishes it, so the peers' new communicator is never
     * left waiting for it outside any deadline.
     */
    private fun controlOf(made: Long, operation: String, entry: FlightRecorder.Entry): Long {
        val out = calls.scratchAddress + MpiNativeCalls.OFF_HANDLE
        // Errors on the new communicator and its duplicate are return codes (a duplicate inherits it).
        failures.check(binding.commSetErrhandler(made, abi.errorsReturn), operation, entry)
        calls.runBlockingCall(operation, entry, null) { binding.commDup(made, out) }
        return abi.readHandle(calls.scratch, MpiNativeCalls.OFF_HANDLE)
    }

    /** [MpiCommunicator.duplicate]'s settings for the new communicator ([OperationCall.extra] of its call). */
    class Duplication(val commConfig: CommConfig, val mpiConfig: MpiConfig)

    /** `MPI_Comm_dup` of [call] ([MpiCommunicator.duplicate], issued by the front as a collective of its own). */
    suspend fun runDuplicate(call: OperationCall): MpiCommunicator {
        val settings = call.extra as Duplication
        val made = make(call) { out -> binding.commDup(handle, out) }
        return MpiBackendFactory.wrap(
            runtime, binding, made[0], settings.commConfig, settings.mpiConfig, "${commName}.dup${call.entry.collectiveSequence}", existingControl = made[1],
        )
    }
}
