package dev.tpcomm.mpi

import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout

/** Turns MPI error codes into text with `MPI_Error_string`. Thread-safe. */
internal object MpiErrors {
    /** MPI's own description of [code], or a fallback naming the code when MPI cannot describe it. */
    fun describe(binding: MpiBinding, code: Int): String = try {
        Arena.ofConfined().use { a ->
            val buf = a.allocate(binding.abi.maxErrorString.toLong() + 1)
            val len = a.allocate(ValueLayout.JAVA_INT)
            if (binding.errorString(code, buf.address(), len.address()) != 0) {
                "unknown MPI error code $code"
            } else {
                val n = len.get(ValueLayout.JAVA_INT, 0).coerceIn(0, binding.abi.maxErrorString)
                String(buf.asSlice(0, n.toLong()).toArray(ValueLayout.JAVA_BYTE), Charsets.UTF_8).trimEnd('\u0000').trim()
                    .ifEmpty { "MPI error code $code" }
            }
        }
    } catch (t: Throwable) {
        "MPI error code $code (MPI_Error_string failed: $t)"
    }
}
