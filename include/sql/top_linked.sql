-- Most linked pages (distinct linking pages, all rounds).
SELECT to_url AS url, count(DISTINCT from_hash) AS inlinks
FROM links GROUP BY 1 ORDER BY inlinks DESC, url LIMIT 50;
