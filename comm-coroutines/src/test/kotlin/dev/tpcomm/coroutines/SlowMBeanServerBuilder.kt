package dev.tpcomm.coroutines

import javax.management.MBeanServer
import javax.management.MBeanServerBuilder
import javax.management.MBeanServerDelegate

/**
 * Test aid: a JMX server builder (`-Djavax.management.builder.initial=`, the JDK's documented hook,
 * `javax.management.MBeanServerFactory`) whose platform MBean server takes 20 s to build, so a
 * program that creates it on its path shows it in its timings.
 */
public class SlowMBeanServerBuilder : MBeanServerBuilder() {
    override fun newMBeanServer(defaultDomain: String?, outer: MBeanServer?, delegate: MBeanServerDelegate?): MBeanServer {
        Thread.sleep(20_000)
        return super.newMBeanServer(defaultDomain, outer, delegate)
    }
}
