package dev.tpcomm.bench.flight

import dev.tpcomm.CommConfig
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * docs/observability.md ("Dumps and the analyzer") shows: 4 local ranks run 20 all-reduces; rank 2 stops for
 * 3 s before the 13th (a stuck data loader), past the 2 s deadline. Argument: the dump directory.
 */
object HangDemo {
    @JvmStatic
    fun main(args: Array<String>) {
        LocalWorld(4, CommConfig(worldSize = 4, timeout = 2.seconds, flightRecorderDir = args[0])).use { w ->
            runBlocking {
                (0 until 4).map { r ->
                    async(Dispatchers.Default) {
                        runCatching {
                            val c = w.communicator(r)
                            val t = Tensor.zeros(dev.tpcomm.DType.Float32, 1024)
                            for (step in 1..20) {
                                if (r == 2 && step == 13) delay(3_000)
                                c.allReduce(t)
                            }
                        }
                    }
                }.awaitAll()
            }
        }
    }
}
