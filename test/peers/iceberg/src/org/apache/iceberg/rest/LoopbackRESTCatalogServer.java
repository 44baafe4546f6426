/*
 * Iceberg's RESTCatalogServer (iceberg-open-api test fixtures, 1.10.1) listening on one address.
 *
 *   java -cp JARS:CLASSES org.apache.iceberg.rest.LoopbackRESTCatalogServer [--host H] [--port-file F]
 *
 * The stock main, RESTCatalogServer.main, builds its backend catalog from the CATALOG_* environment
 * (RCKUtils.environmentCatalogConfig: CATALOG_URI -> uri, CATALOG_IO__IMPL -> io-impl, CATALOG_REST_PORT
 * -> rest.port, ...; a JdbcCatalog on SQLite by default) and serves it with Jetty on every interface
 * (new Server(port)). This class runs the same backend -- RESTCatalogServer's own private
 * initializeBackendCatalog(), called by reflection -- behind the same servlet (RESTCatalogServlet over
 * RESTServerCatalogAdapter, gzip) with one difference: the connector listens on --host (default
 * 127.0.0.1) and rest.port may be 0, an ephemeral port. Once Jetty is started, it prints
 * "listening on http://HOST:PORT" and, with --port-file, writes PORT to that file (renamed into place,
 * so a reader never sees it half written).
 *
 * It lives in org.apache.iceberg.rest for the package-private RESTServerCatalogAdapter and
 * RESTCatalogServer.CatalogContext (the jars are on the class path, not modules, so the split package
 * is allowed).
 */
package org.apache.iceberg.rest;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import org.apache.iceberg.util.PropertyUtil;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public final class LoopbackRESTCatalogServer {
  private LoopbackRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    String host = "127.0.0.1";
    Path portFile = null;
    for (int i = 0; i < args.length; i++) {
      if ("--host".equals(args[i]) && i + 1 < args.length) {
        host = args[++i];
      } else if ("--port-file".equals(args[i]) && i + 1 < args.length) {
        portFile = Paths.get(args[++i]);
      } else {
        System.err.println("usage: LoopbackRESTCatalogServer [--host HOST] [--port-file FILE]");
        System.exit(2);
      }
    }

    RESTCatalogServer.CatalogContext context = backend(new RESTCatalogServer());

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(
        new ServletHolder(new RESTCatalogServlet(new RESTServerCatalogAdapter(context))), "/*");
    handler.insertHandler(new GzipHandler());

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(
        PropertyUtil.propertyAsInt(context.configuration(), RESTCatalogServer.REST_PORT, 0));
    server.addConnector(connector);
    server.setHandler(handler);
    server.setStopAtShutdown(true);
    server.start();

    int port = connector.getLocalPort();
    System.out.println("listening on http://" + host + ":" + port);
    System.out.flush();
    if (portFile != null) {
      Path tmp = portFile.resolveSibling(portFile.getFileName() + ".tmp");
      Files.write(tmp, (port + "\n").getBytes(StandardCharsets.US_ASCII));
      Files.move(tmp, portFile, StandardCopyOption.ATOMIC_MOVE);
    }
    server.join();
  }

  /** RESTCatalogServer's own backend: the CATALOG_* environment, JdbcCatalog on SQLite by default. */
  private static RESTCatalogServer.CatalogContext backend(RESTCatalogServer stock)
      throws Exception {
    Method init = RESTCatalogServer.class.getDeclaredMethod("initializeBackendCatalog");
    init.setAccessible(true);
    try {
      return (RESTCatalogServer.CatalogContext) init.invoke(stock);
    } catch (InvocationTargetException e) {
      throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
    }
  }
}
