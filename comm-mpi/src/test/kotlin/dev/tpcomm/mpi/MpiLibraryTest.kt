package dev.tpcomm.mpi

import dev.tpcomm.BackendUnavailableException
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class MpiLibraryTest : FunSpec({
    test("the launcher's implementation is tried first") {
        MpiLibrary.candidates(null, mapOf("OMPI_COMM_WORLD_SIZE" to "2")).first() shouldBe "libmpi.so.40"
        MpiLibrary.candidates(null, mapOf("PMI_RANK" to "0")).first() shouldBe "libmpich.so.12"
        MpiLibrary.candidates(null, emptyMap()).first() shouldBe "libmpi.so.40"
    }

    test("an explicit library (config, then TPCOMM_MPI_LIBRARY) is the only candidate") {
        MpiLibrary.candidates("/a/libmpi.so", mapOf("TPCOMM_MPI_LIBRARY" to "/b/libmpi.so")) shouldBe listOf("/a/libmpi.so", "/b/libmpi.so")
        MpiLibrary.candidates(null, mapOf("TPCOMM_MPI_LIBRARY" to "/b/libmpi.so")) shouldBe listOf("/b/libmpi.so")
    }

    test("a missing library names what was tried and the Debian packages") {
        val e = shouldThrow<BackendUnavailableException> { MpiLibrary.open(listOf("/nonexistent/libmpi.so.40", "libnot-an-mpi.so.7")) }
        e.message shouldContain "/nonexistent/libmpi.so.40"
        e.message shouldContain "libnot-an-mpi.so.7"
        e.message shouldContain "apt-get install openmpi-bin libopenmpi-dev"
        e.message shouldContain "mpich libmpich-dev"
        e.backend shouldBe "mpi"
    }

    test("a library that is not MPI is refused") {
        val e = shouldThrow<BackendUnavailableException> { MpiLibrary.open(listOf("libc.so.6")) }
        e.message shouldContain "no MPI_Get_library_version"
    }

    test("the UCX signal fix is applied before opening") {
        runCatching { MpiLibrary.open(listOf("/nonexistent/x.so")) }
        Libc.getenv("UCX_ERROR_SIGNALS") shouldBe (System.getenv("UCX_ERROR_SIGNALS") ?: "")
    }

    test("the factory is unavailable without a launcher and says how to run") {
        val f = MpiBackendFactory(emptyMap())
        f.isAvailable() shouldBe false
        f.unavailableReason()!! shouldContain "mpirun"
        f.priority shouldBe 50
        f.name shouldBe "mpi"
    }

    test("the factory reports a missing library under a launcher") {
        val f = MpiBackendFactory(mapOf("OMPI_COMM_WORLD_SIZE" to "2", "TPCOMM_MPI_LIBRARY" to "/nonexistent/libmpi.so"))
        if (MpiLibrary.loaded == null) {
            f.isAvailable() shouldBe false
            f.unavailableReason()!! shouldContain "/nonexistent/libmpi.so"
        }
    }
})
