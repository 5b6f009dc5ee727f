package kafkaautoscaler.broker;

import java.util.HashMap;
import java.util.Map;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * One book and one reader thread per source. A broker may construct its assignors more than
 * once (its configuration is built more than once): instances configured alike share them.
 */
final class SharedBooks<B extends RecordBook<?>> {
  private final Map<String, B> books = new HashMap<>();
  private final Map<String, PlanReader> readers = new HashMap<>();

  /**
   * The book of {@code source}: made by {@code make} and handed to {@code made} the first
   * time, with a reader started on it.
   */
  synchronized B bookFor(SourceSettings source, Function<SourceSettings, B> make, Consumer<B> made) {
    B book = books.get(source.key());
    if (book == null) {
      book = make.apply(source);
      PlanReader reader = new PlanReader(source.bootstrap(), source.client(), book);
      books.put(source.key(), book);
      readers.put(source.key(), reader);
      made.accept(book);
      reader.start();
    }
    return book;
  }

  /** Stops every reader (the broker is shutting down). */
  synchronized void close() {
    readers.values().forEach(PlanReader::close);
    readers.clear();
    books.clear();
  }
}
