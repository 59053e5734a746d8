package dev.tpcomm.examples

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.io.File

/** The demo under mpirun (it launches mpirun itself): exit code 0 means it matched the dense model. */
class MpiDemoTest : FunSpec({
    val mpirun = System.getenv("PATH").orEmpty().split(File.pathSeparator).any { File(it, "mpirun.openmpi").canExecute() }
    for (sp in listOf(false, true)) {
        test("--backend mpi --world 2${if (sp) " --sequence-parallel" else ""} matches the dense model").config(enabledIf = { mpirun }) {
            val args = listOf("--backend", "mpi", "--world", "2", "--steps", "3", "--hidden", "16", "--ffn", "32", "--seq", "8",
                "--batch", "2", "--timing-steps", "1", "--no-progress") + if (sp) listOf("--sequence-parallel") else emptyList()
            runDemo(args) shouldBe 0
        }
    }
})
