package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlin.time.Duration.Companion.seconds

/**
 * The reference world's mailboxes under many concurrent senders. CI once saw the conformance ring
 * exchange in a world of 5 time out with every rank waiting for a message its predecessor had sent:
 * the mail version was bumped with a plain read-modify-write, so two senders racing could put it
 * back to a value a receiver had already seen, and the receiver slept past its message. The race
 * needs a sender preempted between its read and its write, so this stress did not catch it on a quiet
 * machine (200,000 rounds passed before the fix); it guards the atomic bump against a regression.
 */
class ReferenceWorldMailTest : FunSpec({
    test("ring exchanges in a world of 5 never lose a wake-up (20,000 rounds, 5 s per receive)") {
        val rounds = 20_000
        val config = CommConfig(timeout = 5.seconds)
        val received = ReferenceWorld.run(5, config) { comm ->
            val next = (comm.rank + 1) % comm.worldSize
            val prev = (comm.rank + comm.worldSize - 1) % comm.worldSize
            var sum = 0L
            repeat(rounds) { round ->
                val buf = Tensor.zeros(DType.Int64, 1)
                coroutineScope {
                    val sent = async(start = CoroutineStart.UNDISPATCHED) {
                        comm.send(Tensor.of(longArrayOf(round.toLong()), 1), next, 0)
                    }
                    comm.recv(buf, prev, 0)
                    sent.await()
                }
                sum += buf.toLongArray()[0]
            }
            sum
        }
        received shouldBe List(5) { rounds.toLong() * (rounds - 1) / 2 }
    }
})
