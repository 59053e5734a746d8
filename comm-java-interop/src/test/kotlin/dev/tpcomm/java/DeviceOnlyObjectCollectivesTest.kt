package dev.tpcomm.java

import dev.tpcomm.Communicator
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.future.await
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.seconds

/**
 * A GPU backend (NCCL, RCCL) refuses host tensors in its collectives and moves objects its own way
 * (`NcclCommunicator.allGatherObject` stages the bytes through device buffers). The Java object
 * collectives must therefore go through the communicator's own object collectives, never through
 * host-tensor collectives: this double refuses host tensors the way those backends do.
 */
class DeviceOnlyObjectCollectivesTest : FunSpec({
    class HostRefusing(private val inner: Communicator) : Communicator by inner {
        private fun refuse(op: String, t: Tensor): Nothing =
            throw IllegalArgumentException("$op: this communicator moves device tensors only; got a tensor on ${t.device}")

        override suspend fun allGather(input: Tensor, dim: Int): Tensor = refuse("allGather", input)

        override suspend fun broadcast(tensor: Tensor, root: Int): Tensor = refuse("broadcast", tensor)
    }

    test("Class and codec object collectives from Java work on a backend that refuses host tensors, failures included").config(timeout = 60.seconds) {
        val codec = object : ObjectCodec<String> {
            override fun encode(value: String): ByteArray = if (value == "bad") error("cannot encode bad") else value.encodeToByteArray()
            override fun decode(bytes: ByteArray): String = bytes.decodeToString()
        }
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(3) { local ->
                val comm = JavaComm.wrap(HostRefusing(local))
                val r = comm.rank
                val steps = comm.allGatherObject(Step(r, r * 0.5), Step::class.java).await()
                val root = comm.broadcastObject(if (r == 2) Step(2, 1.0) else null, 2, Step::class.java).await()
                val words = comm.allGatherObject("w$r", codec).await()
                val fromRoot = comm.broadcastObject(if (r == 0) "hello" else null, 0, codec).await()
                // await(), not join(): a rank must not block its thread inside runLocalWorld's coroutines.
                val failure = runCatching { comm.allGatherObject(if (r == 1) "bad" else "ok", codec).await() }.exceptionOrNull()
                failure.shouldBeInstanceOf<ObjectCodecException>().ranks shouldBe listOf(1)
                listOf(steps, root, words, fromRoot)
            }
        }
        results shouldBe List(3) { listOf(List(3) { Step(it, it * 0.5) }, Step(2, 1.0), listOf("w0", "w1", "w2"), "hello") }
    }
})
