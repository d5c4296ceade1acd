"""Money: billing accounts, monthly invoices and credit notes priced from the claim ledger
(`portal.cluster.models.UsageRecord`) and the order history, their PDFs, the FOCUS export and the
billing staff's admin."""
