package dev.tpcomm.coroutines

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain

/** `Comm.create` with the local backend on the classpath: names are case-insensitive; a missing backend names its real module. */
class CommCreateSpec : FunSpec({
    test("Comm.create(\"LOCAL\") and Comm.create(\"Auto\") find the local backend") {
        for (name in listOf("LOCAL", "Local", "local", "Auto")) {
            Comm.create(name, CommConfig()).use { comm ->
                comm.backendName shouldBe "local"
                comm.allReduce(Tensor.of(floatArrayOf(2f))).toFloatArray().toList() shouldBe listOf(2f)
            }
        }
    }

    test("Comm.create(\"MPI\") without comm-mpi names dev.tpcomm:comm-mpi and what is on the classpath") {
        val e = shouldThrow<BackendUnavailableException> { Comm.create("MPI", CommConfig()) }
        e.message shouldContain "dev.tpcomm:comm-mpi"
        e.message shouldNotContain "comm-MPI"
        e.message shouldContain "found: local"
    }
})
