-- Status of every known URL in the current CrawlDb.
SELECT status, count(*) AS urls, round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS pct
FROM crawldb GROUP BY 1 ORDER BY urls DESC;
