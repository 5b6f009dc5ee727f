import com.sun.tools.attach.VirtualMachine;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Prints every attribute of the MBeans matching a pattern in a running JVM, one
 * "NAME ATTRIBUTE=VALUE" line each: {@code java MBeanAttributes.java PID PATTERN}. It attaches
 * to the JVM (same user) and starts its local management agent, so the JVM needs no JMX port.
 */
public final class MBeanAttributes {
  public static void main(String[] args) throws Exception {
    VirtualMachine vm = VirtualMachine.attach(args[0]);
    String address;
    try {
      address = vm.startLocalManagementAgent();
    } finally {
      vm.detach();
    }
    try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
      MBeanServerConnection server = connector.getMBeanServerConnection();
      for (ObjectName name : server.queryNames(new ObjectName(args[1]), null)) {
        for (MBeanAttributeInfo attribute : server.getMBeanInfo(name).getAttributes()) {
          Object value = server.getAttribute(name, attribute.getName());
          System.out.println(name + " " + attribute.getName() + "=" + value);
        }
      }
    }
  }
}
