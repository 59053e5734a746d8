package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator

/**
 * The MPI backend's [MpiCommunicator.duplicate] on any [Communicator] a program holds (as
 * `Comm.create` returns it), without naming the backend's class. Collective: every rank must call.
 * A new communicator over the same ranks (`MPI_Comm_dup`) with its own thread, this one's settings
 * changed by [commConfig] (null: the same) and [mpi] (null: the same); breaking it leaves this one
 * usable. Recorded, numbered and checked as any collective.
 *
 * @throws IllegalArgumentException on another backend's communicator (nothing is recorded), or when
 *   [commConfig]'s worldSize/rank differ from this communicator's.
 */
public suspend fun Communicator.duplicate(commConfig: CommConfig? = null, mpi: MpiConfig? = null): Communicator {
    val c = this as? MpiCommunicator ?: throw IllegalArgumentException(
        "duplicate is an extra of the MPI backend, but this communicator is the $backendName backend's; " +
            "on any backend, split(color = 0, key = rank) makes a new communicator over the same ranks",
    )
    return c.duplicate(commConfig ?: c.config, mpi ?: c.mpiConfig)
}
