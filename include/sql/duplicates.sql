-- Exact and near-duplicate captures and the original they duplicate.
SELECT crawl_status, url, duplicate_of, round
FROM pages WHERE duplicate_of IS NOT NULL
ORDER BY round, crawl_status, url LIMIT 100;
