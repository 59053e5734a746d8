package dev.tpcomm.djl.example

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import kotlinx.coroutines.runBlocking
import java.io.DataOutputStream
import java.nio.file.Files
import java.nio.file.Path
import kotlin.system.exitProcess

/**
 * One rank of the data-parallel example under mpirun: trains with [DataParallelMlp.trainDataParallel]
 * on the MPI backend and writes its final parameters to `<dir>/rank-<r>.bin` (each parameter: its
 * length, then its floats). Exit code 0 on success, 1 on any failure (printed).
 */
object DataParallelMpiMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val dir = Path.of(args.single())
        // Two ranks share this machine's cores: one torch thread each (before the engine loads).
        System.setProperty("ai.djl.pytorch.num_threads", "1")
        System.setProperty("ai.djl.pytorch.num_interop_threads", "1")
        val code = try {
            runBlocking {
                Comm.create("mpi", CommConfig.fromEnvironment()).use { comm ->
                    val parameters = DataParallelMlp.trainDataParallel(comm)
                    DataOutputStream(Files.newOutputStream(dir.resolve("rank-${comm.rank}.bin"))).use { out ->
                        for (p in parameters) {
                            out.writeInt(p.size)
                            for (v in p) out.writeFloat(v)
                        }
                    }
                }
            }
            0
        } catch (e: Throwable) {
            e.printStackTrace()
            1
        }
        System.out.flush()
        exitProcess(code)
    }

    /** What [main] wrote for one rank. */
    fun read(file: Path): List<FloatArray> = java.io.DataInputStream(Files.newInputStream(file)).use { input ->
        buildList {
            while (input.available() > 0) add(FloatArray(input.readInt()) { input.readFloat() })
        }
    }
}
